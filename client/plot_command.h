// `petra plot`: a job's loss, accuracy, throughput and bubble as a PNG,
// drawn by python/petra/plot.py (built into petra as its text, run with
// python3 and matplotlib): the C++ binaries never load a plotting library.
#pragma once

#include <string>
#include <vector>

#include "petra/v1/coordinator.pb.h"

namespace petra::client {

int RunPlot(const std::string& program, const std::vector<std::string>& args);

// A coordinator job's report (`petra train --report`'s JSON) from its
// record: its epochs' history and its stages' newest figures.
std::string FleetReportJson(const petra::v1::Job& job);

// FleetReportJson(job) into `path`; false (errno set) when it cannot.
bool WriteFleetReport(const petra::v1::Job& job, const std::string& path);

// python/petra/plot.py's text (generated into the build).
const char* PlotScript();

}  // namespace petra::client
