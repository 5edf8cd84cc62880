#include "client/job_progress.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/progress_words.h"
#include "services/base/json_text.h"
#include "services/base/proto_json.h"
#include "services/link/transport_choice.h"
#include "services/wire/status_map.h"

namespace petra::client {

using petra::v1::JobEvent;

std::string StateName(petra::v1::JobState state) {
  std::string name = petra::v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  return absl::AsciiStrToLower(name);
}

std::string Duration(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
  return s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60)
                 : absl::StrFormat("%ds", s);
}

std::string JobJson(const google::protobuf::Message& m, bool pretty) {
  base::ProtoJsonOptions options;
  options.pretty = pretty;
  return base::ProtoToJson(m, options);
}

ProgressPrinter::ProgressPrinter(bool quiet, bool json_lines)
    : quiet_(quiet), json_lines_(json_lines), tty_(isatty(STDOUT_FILENO)) {}

void ProgressPrinter::EndLine() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
}

void ProgressPrinter::OnEvent(const JobEvent& event) {
  const petra::v1::Job& job = event.job();
  const petra::v1::Progress& p = job.progress();
  if (event.kind() == JobEvent::KIND_EPOCH_END ||
      event.kind() == JobEvent::KIND_EVALUATION) {
    epochs_.push_back(p);
  }
  if (quiet_) return;
  if (json_lines_) {
    std::printf("%s\n", JobJson(event, false).c_str());
    std::fflush(stdout);
    return;
  }
  switch (event.kind()) {
    case JobEvent::KIND_STATE:
      if (job.state() != state_) {
        const bool was_recovering = state_ == petra::v1::JOB_STATE_RECOVERING;
        state_ = job.state();
        EndLine();
        std::string detail;
        if (job.has_error()) detail = absl::StrCat(": ", job.error().message());
        if (job.recoveries_size() > 0) {
          const petra::v1::Recovery& r = *job.recoveries().rbegin();
          if (state_ == petra::v1::JOB_STATE_RECOVERING) {
            detail = absl::StrCat(": ", r.reason());
          } else if (was_recovering && state_ == petra::v1::JOB_STATE_RUNNING) {
            detail = absl::StrFormat(" (recovered in %.1f s from epoch %u)",
                                     r.seconds(), r.restored_epoch());
          }
        }
        std::printf("%s: %s%s\n", job.id().c_str(),
                    StateName(job.state()).c_str(), detail.c_str());
      }
      if (!job.activity().empty() && job.activity() != activity_) {
        EndLine();
        std::printf("%s: %s\n", job.id().c_str(), job.activity().c_str());
      }
      activity_ = job.activity();
      break;
    case JobEvent::KIND_PROGRESS: {
      const auto now = std::chrono::steady_clock::now();
      if (!tty_ && now - last_line_ < std::chrono::seconds(15)) break;
      last_line_ = now;
      const double done = p.total_steps() > 0
                              ? static_cast<double>(p.step()) / p.total_steps()
                              : 0.0;
      const int width = 20;
      const int filled = static_cast<int>(done * width + 0.5);
      const bool lm = IsLanguageModelJob(job.spec());
      std::printf(
          "%sepoch %u/%u [%s%s] %3.0f%%  step %llu/%llu  loss %.4f  %s"
          "%.0f %s  elapsed %s  ETA %s%s",
          tty_ ? "\r" : "", p.epoch(), p.total_epochs(),
          std::string(filled, '#').c_str(),
          std::string(width - filled, '.').c_str(), 100 * done,
          static_cast<unsigned long long>(p.step()),
          static_cast<unsigned long long>(p.total_steps()), p.train_loss(),
          lm ? ""
             : absl::StrFormat("acc %.2f%%  ", 100 * p.train_accuracy())
                   .c_str(),
          p.samples_per_second(), RateUnit(lm),
          Duration(p.elapsed_seconds()).c_str(),
          Duration(p.eta_seconds()).c_str(), tty_ ? "   " : "\n");
      line_open_ = tty_;
      std::fflush(stdout);
      break;
    }
    case JobEvent::KIND_EPOCH_END:
    case JobEvent::KIND_EVALUATION:
      EndLine();
      std::printf("%s: %s, elapsed %s\n", PointName(p).c_str(),
                  EpochFigures(p, IsLanguageModelJob(job.spec())).c_str(),
                  Duration(p.elapsed_seconds()).c_str());
      break;
    case JobEvent::KIND_CHECKPOINT:
      EndLine();
      std::printf("checkpoint %s\n", job.last_checkpoint().c_str());
      break;
    default:
      break;
  }
  std::fflush(stdout);
}

void FollowCancel::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool FollowCancel::cancelled() {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void FollowCancel::Attach(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  context_ = context;
  if (cancelled_ && context != nullptr) context->TryCancel();
}

absl::StatusOr<petra::v1::Job> FollowJob(
    petra::v1::CoordinatorService::Stub& stub, const std::string& id,
    ProgressPrinter& printer, const FollowOptions& options) {
  using Clock = std::chrono::steady_clock;
  FollowCancel own_cancel;
  FollowCancel& cancel =
      options.cancel != nullptr ? *options.cancel : own_cancel;
  auto say = [&](const std::string& line) {
    if (options.say) options.say(line);
  };
  petra::v1::Job last;
  // Set while the coordinator is away: since when, and the next wait.
  std::optional<Clock::time_point> lost_since;
  std::chrono::milliseconds backoff(500);
  bool ever_heard = false;  // a wrong address fails at once, never retried
  while (true) {
    grpc::ClientContext context;
    cancel.Attach(&context);
    petra::v1::WatchJobRequest request;
    request.set_job_id(id);
    auto reader = stub.WatchJob(&context, request);
    JobEvent event;
    while (reader->Read(&event)) {
      if (lost_since) {
        say(absl::StrCat(
            "coordinator reachable again after ",
            Duration(std::chrono::duration<double>(Clock::now() - *lost_since)
                         .count()),
            "; following ", id, " on"));
        lost_since.reset();
        backoff = std::chrono::milliseconds(500);
      }
      ever_heard = true;
      printer.OnEvent(event);
      last = event.job();
    }
    const grpc::Status s = reader->Finish();
    cancel.Attach(nullptr);
    if (cancel.cancelled()) return absl::CancelledError("stopped following");
    // A stream that ended well on a job that has not: the coordinator let
    // go of it (it stops), as UNAVAILABLE says too.
    const bool ended = last.state() >= petra::v1::JOB_STATE_SUCCEEDED;
    if (s.ok() && ended) return last;
    if ((!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE) ||
        !ever_heard) {
      return wire::FromGrpcStatus(s);
    }
    const std::string why =
        s.ok() ? "the coordinator ended the stream" : s.error_message();
    if (!lost_since) {
      lost_since = Clock::now();
      if (options.reconnect_timeout.count() > 0) {
        say(absl::StrCat("coordinator unreachable (", why,
                         "), retrying for up to ",
                         Duration(options.reconnect_timeout.count()),
                         " (--reconnect-timeout)"));
      }
    }
    if (Clock::now() - *lost_since >= options.reconnect_timeout) {
      return absl::UnavailableError(absl::StrCat(
          "the coordinator stayed unreachable",
          options.reconnect_timeout.count() > 0
              ? absl::StrCat(" for ",
                             Duration(options.reconnect_timeout.count()),
                             " (--reconnect-timeout)")
              : "",
          ": ", why));
    }
    // Waits in small steps: Ctrl-C ends the wait at once.
    const auto until = Clock::now() + backoff;
    while (Clock::now() < until && !cancel.cancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (cancel.cancelled()) return absl::CancelledError("stopped following");
    backoff = std::min<std::chrono::milliseconds>(2 * backoff,
                                                  std::chrono::seconds(5));
  }
}

namespace {

double TrainingSeconds(const petra::v1::StageStats& s) {
  return s.forward_seconds() + s.backward_seconds() + s.idle_seconds() +
         s.send_seconds();
}

}  // namespace

double BubbleFraction(const petra::v1::StageStats& stage) {
  const double total = TrainingSeconds(stage);
  return total > 0 ? stage.idle_seconds() / total : 0.0;
}

double BubbleFraction(
    const google::protobuf::RepeatedPtrField<petra::v1::StageStats>& stages) {
  double idle = 0, total = 0;
  for (const petra::v1::StageStats& s : stages) {
    idle += s.idle_seconds();
    total += TrainingSeconds(s);
  }
  return total > 0 ? idle / total : 0.0;
}

void PrintStageTable(const petra::v1::Job& job) {
  bool on_device = false;  // a GPU's allocator figures get their columns
  bool checked = false;    // so does the end-to-end gradient check
  bool rebuilt = false;    // and the rebuild's measured error
  bool linked = false;     // a fleet: each link's data channel
  for (const petra::v1::StageStats& s : job.progress().stages()) {
    on_device = on_device || s.memory().device_reserved_bytes() > 0;
    checked = checked || s.end_to_end_samples() > 0;
    rebuilt = rebuilt || s.rebuild_error_samples() > 0;
  }
  for (const petra::v1::StagePlacement& p : job.stages()) {
    linked =
        linked || p.transport_to_next() != petra::v1::TRANSPORT_UNSPECIFIED;
  }
  // With replicas, job.stages() holds replica r's stage j at r J + j, and
  // the rows say which copy ("r/j").
  const int replicas =
      static_cast<int>(std::max<uint32_t>(1, job.spec().replicas()));
  const int stage_count = job.stages_size() % replicas == 0
                              ? job.stages_size() / replicas
                              : job.stages_size();
  std::printf("\n%-6s %-7s %6s %10s %7s %12s %14s %12s %10s %12s %10s",
              replicas > 1 ? "copy/j" : "stage", "blocks", "delay", "staleness",
              "bubble", "params+opt", "input buffer", "weight stash", "peak",
              "tensors peak", "rss");
  if (linked) std::printf(" %8s", "to next");
  if (on_device) {
    std::printf(" %12s %12s %12s", "device", "dev reserved", "dev peak");
  }
  if (checked) std::printf(" %8s %8s", "e2e cos", "e2e norm");
  if (rebuilt) std::printf(" %11s", "rebuild err");
  std::printf("\n");
  for (const petra::v1::StageStats& s : job.progress().stages()) {
    const petra::v1::MemoryBreakdown& m = s.memory();
    std::string blocks = "-";
    const int j = static_cast<int>(s.stage_index());
    const int k = static_cast<int>(s.replica()) * stage_count + j;
    if (j < stage_count && k < job.stages_size()) {
      const auto& placement = job.stages(k);
      blocks =
          absl::StrCat(placement.layer_begin(), "-", placement.layer_end() - 1);
    }
    const std::string label =
        replicas > 1 ? absl::StrCat(s.replica(), "/", j) : absl::StrCat(j);
    std::printf(
        "%-6s %-7s %6.1f %10.2f %6.1f%% %10.2fMB %12.2fMB %10.2fMB %8.2fMB "
        "%10.2fMB %8.0fMB",
        label.c_str(), blocks.c_str(), s.delay_ticks_mean(), s.staleness_mean(),
        100 * BubbleFraction(s),
        (m.parameters_bytes() + m.optimizer_state_bytes()) / 1e6,
        m.activation_buffer_bytes() / 1e6, m.weight_stash_bytes() / 1e6,
        m.peak_bytes() / 1e6, m.host_tensor_peak_bytes() / 1e6,
        m.process_rss_bytes() / 1e6);
    if (linked) {
      const bool last = j + 1 >= stage_count || k >= job.stages_size();
      std::printf(
          " %8s",
          last
              ? "-"
              : link::TransportName(job.stages(k).transport_to_next()).c_str());
    }
    if (on_device) {
      std::printf(" %10.2fMB %10.2fMB %10.2fMB", m.device_bytes() / 1e6,
                  m.device_reserved_bytes() / 1e6, m.device_peak_bytes() / 1e6);
    }
    if (checked) {
      std::printf(" %8.4f %8.4f", s.end_to_end_cosine_similarity(),
                  s.end_to_end_norm_ratio());
    }
    if (rebuilt) {
      if (s.rebuild_error_samples() > 0) {
        std::printf(" %11.2e", s.rebuild_error_max());
      } else {
        std::printf(" %11s", "-");
      }
    }
    std::printf("\n");
  }
  std::printf(
      "(delay in ticks and staleness in optimizer steps between a "
      "micro-batch's\n"
      " forward and its backward; bubble the share of the stage's training "
      "time it\n"
      " waited for its next input, %.1f%% over the job's stages; buffer and "
      "stash\n"
      " now, peak the highest sum; tensors peak the most the stage's "
      "threads held in\n"
      " CPU tensors, as the allocator counted them)\n",
      100 * BubbleFraction(job.progress().stages()));
  if (linked) {
    std::printf(
        "(to next: the data channel to the next stage, grpc, grpc_bulk or "
        "shm; docs/DATA_PLANE.md)\n");
  }
  if (checked) {
    std::printf(
        "(e2e: the applied gradient against the true end-to-end one, cosine "
        "and\n norm ratio, mean of the last training pass's samples)\n");
  }
  if (rebuilt) {
    std::printf(
        "(rebuild err: the largest ||x - rebuilt x|| / ||x|| measured, with "
        "the forward's\n weights; - where the stage keeps its input)\n");
  }
}

namespace {

// An epoch's end-to-end gradient check per stage (stage order), when it had
// one: `, "end_to_end_cosine": [...], "end_to_end_norm_ratio": [...]`.
std::string EndToEndByStage(const petra::v1::Progress& e) {
  std::vector<const petra::v1::StageStats*> stages;
  // Replica 0's (the check runs there).
  for (const petra::v1::StageStats& s : e.stages()) {
    if (s.replica() == 0) stages.push_back(&s);
  }
  std::sort(stages.begin(), stages.end(), [](const auto* a, const auto* b) {
    return a->stage_index() < b->stage_index();
  });
  bool any = false;
  std::vector<std::string> cosine, ratio;
  for (const petra::v1::StageStats* s : stages) {
    any |= s->end_to_end_samples() > 0;
    cosine.push_back(
        absl::StrFormat("%.6f", s->end_to_end_cosine_similarity()));
    ratio.push_back(absl::StrFormat("%.6f", s->end_to_end_norm_ratio()));
  }
  if (!any) return "";
  return absl::StrCat(", \"end_to_end_cosine\": [", absl::StrJoin(cosine, ", "),
                      "], \"end_to_end_norm_ratio\": [",
                      absl::StrJoin(ratio, ", "), "]");
}

}  // namespace

namespace {

// One epoch's (or mid-epoch evaluation's) object of the report.
std::string EpochJson(const petra::v1::Progress& e) {
  return absl::StrFormat(
      "{\"epoch\": %u, \"step\": %llu, \"learning_rate\": %.9g, "
      "\"train_loss\": %.6f, \"train_accuracy\": "
      "%.6f, \"test_accuracy\": %.6f, \"test_loss\": %.6f, "
      "\"samples_per_second\": %.2f, \"elapsed_seconds\": %.2f, "
      "\"mid_epoch\": %s%s}",
      e.epoch(), static_cast<unsigned long long>(e.step()), e.learning_rate(),
      e.train_loss(), e.train_accuracy(), e.test_accuracy(), e.test_loss(),
      e.samples_per_second(), e.elapsed_seconds(),
      e.mid_epoch() ? "true" : "false", EndToEndByStage(e));
}

// One stage's object of the report: its statistics `s`, its placement in
// the job (replica r's stage j is placement r J + j; in-process: replica
// 0's only, `per_copy` stages a copy).
std::string StageJson(const petra::v1::Job& job, const petra::v1::StageStats& s,
                      int per_copy) {
  const petra::v1::MemoryBreakdown& m = s.memory();
  int begin = 0, end = 0;
  std::string device;
  // The data channel to the next stage: null in-process and on the last.
  std::string to_next = "null";
  const int k = static_cast<int>(s.replica()) * per_copy +
                static_cast<int>(s.stage_index());
  if (static_cast<int>(s.stage_index()) < per_copy && k < job.stages_size()) {
    const petra::v1::StagePlacement& p = job.stages(k);
    begin = p.layer_begin();
    end = p.layer_end();
    device = p.device();
    if (p.transport_to_next() != petra::v1::TRANSPORT_UNSPECIFIED) {
      to_next = base::JsonString(link::TransportName(p.transport_to_next()));
    }
  }
  return absl::StrFormat(
      "{\"index\": %u, \"replica\": %u, \"address\": %s, "
      "\"device\": %s, "
      "\"blocks\": [%d, %d], \"transport_to_next\": %s, "
      "\"memory_bytes\": {\"parameters\": %llu, \"optimizer_state\": %llu, "
      "\"activation_buffer\": %llu, \"weight_stash\": %llu, \"peak\": %llu, "
      "\"process_rss\": %llu, \"device_allocated\": %llu, "
      "\"device_reserved\": %llu, "
      "\"device_peak\": %llu, \"host_tensors\": %llu, "
      "\"host_tensors_peak\": %llu, \"host_tensors_train_peak\": %llu}, "
      "\"staleness_mean\": %.4f, "
      "\"delay_ticks_mean\": %.4f, \"optimizer_steps\": %llu, "
      "\"forward_count\": %llu, \"backward_count\": %llu, "
      "\"forward_seconds\": %.3f, \"backward_seconds\": %.3f, "
      "\"idle_seconds\": %.3f, \"send_seconds\": %.3f, "
      "\"bubble_fraction\": %.4f, \"skipped_micro_batches\": %llu, "
      "\"end_to_end\": {\"samples\": %u, \"cosine_similarity\": %.6f, "
      "\"norm_ratio\": %.6f}, \"rebuild_error\": {\"samples\": %u, "
      "\"mean\": %.3e, \"max\": %.3e}, \"allreduce_seconds\": %.3f, "
      "\"allreduce_bytes\": %llu}",
      s.stage_index(), s.replica(), base::JsonString(s.address()),
      base::JsonString(device), begin, end, to_next,
      static_cast<unsigned long long>(m.parameters_bytes()),
      static_cast<unsigned long long>(m.optimizer_state_bytes()),
      static_cast<unsigned long long>(m.activation_buffer_bytes()),
      static_cast<unsigned long long>(m.weight_stash_bytes()),
      static_cast<unsigned long long>(m.peak_bytes()),
      static_cast<unsigned long long>(m.process_rss_bytes()),
      static_cast<unsigned long long>(m.device_bytes()),
      static_cast<unsigned long long>(m.device_reserved_bytes()),
      static_cast<unsigned long long>(m.device_peak_bytes()),
      static_cast<unsigned long long>(m.host_tensor_bytes()),
      static_cast<unsigned long long>(m.host_tensor_peak_bytes()),
      static_cast<unsigned long long>(m.host_tensor_train_peak_bytes()),
      s.staleness_mean(), s.delay_ticks_mean(),
      static_cast<unsigned long long>(s.optimizer_steps()),
      static_cast<unsigned long long>(s.forward_count()),
      static_cast<unsigned long long>(s.backward_count()), s.forward_seconds(),
      s.backward_seconds(), s.idle_seconds(), s.send_seconds(),
      BubbleFraction(s),
      static_cast<unsigned long long>(s.skipped_micro_batches()),
      s.end_to_end_samples(), s.end_to_end_cosine_similarity(),
      s.end_to_end_norm_ratio(), s.rebuild_error_samples(),
      s.rebuild_error_mean(), s.rebuild_error_max(), s.allreduce_seconds(),
      static_cast<unsigned long long>(s.allreduce_bytes()));
}

}  // namespace

std::string ReportJson(const petra::v1::Job& job,
                       const std::vector<petra::v1::Progress>& epochs,
                       double wall, const std::string& runner,
                       const std::string& model_file) {
  const petra::v1::Progress& last = job.progress();
  // Training samples over training seconds, both summed over epochs (an
  // epoch's samples from its optimizer steps, its seconds from its rate).
  // A step of every replica at once.
  // A language model's samples are its tokens (every one a prediction).
  const bool lm = IsLanguageModelJob(job.spec());
  const double per_step =
      static_cast<double>(job.spec().training().micro_batch_size() *
                          job.spec().training().accumulation_steps()) *
      std::max<uint32_t>(1, job.spec().replicas()) *
      (lm ? std::max<uint32_t>(1, job.spec().model().transformer().seq_len())
          : 1);
  double samples = 0, seconds = 0;
  uint64_t previous_step = 0;
  for (const auto& e : epochs) {
    // An epoch's rate covers the whole epoch: its end's step says how far.
    if (e.mid_epoch()) continue;
    const double n = (e.step() - previous_step) * per_step;
    previous_step = e.step();
    if (e.samples_per_second() > 0) {
      samples += n;
      seconds += n / e.samples_per_second();
    }
  }
  const double rate = seconds > 0 ? samples / seconds : 0;
  std::string out = absl::StrFormat(
      "{\n  \"job\": %s,\n  \"name\": %s,\n  \"runner\": %s,\n"
      "  \"state\": %s,\n"
      "  \"test_accuracy\": %.6f,\n  \"test_loss\": %.6f,\n"
      "  \"train_loss\": %.6f,\n  \"train_accuracy\": %.6f,\n"
      "  \"samples_per_second\": %.2f,\n  \"train_seconds\": %.2f,\n"
      "  \"wall_seconds\": %.2f,\n  \"bubble_fraction\": %.4f,\n"
      "  \"optimizer_steps\": %llu,\n  \"corrupt_images_skipped\": %llu,\n"
      "  \"model\": %s,\n%s  \"epochs\": [",
      base::JsonString(job.id()), base::JsonString(job.spec().name()),
      base::JsonString(runner), base::JsonString(StateName(job.state())),
      last.test_accuracy(), last.test_loss(), last.train_loss(),
      last.train_accuracy(), rate, seconds, wall, BubbleFraction(last.stages()),
      static_cast<unsigned long long>(last.step()),
      static_cast<unsigned long long>(last.corrupt_images_skipped()),
      base::JsonString(model_file),
      lm ? absl::StrFormat("  \"tokens_per_second\": %.2f,\n"
                           "  \"bits_per_byte\": %.6f,\n"
                           "  \"perplexity\": %.6f,\n",
                           rate, BitsPerByte(last), std::exp(last.test_loss()))
         : "");
  for (size_t i = 0; i < epochs.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", "\n    ", EpochJson(epochs[i]));
  }
  absl::StrAppend(&out, "\n  ],\n  \"stages\": [");
  // Replica r's stage j is placement r J + j (in-process: replica 0's only).
  const int copies =
      static_cast<int>(std::max<uint32_t>(1, job.spec().replicas()));
  const int per_copy = job.stages_size() % copies == 0
                           ? job.stages_size() / copies
                           : job.stages_size();
  for (int i = 0; i < last.stages_size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", "\n    ",
                    StageJson(job, last.stages(i), per_copy));
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace petra::client
