#include "client/progress_words.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "services/catalog/architecture_catalog.h"

namespace petra::client {

bool IsLanguageModelJob(const petra::v1::JobSpec& spec) {
  return catalog::IsLanguageModel(spec.model().architecture());
}

double BitsPerByte(const petra::v1::Progress& p) {
  return p.has_test_bits_per_byte() ? p.test_bits_per_byte()
                                    : p.test_loss() / std::log(2.0);
}

const char* RateUnit(bool language_model) {
  return language_model ? "tokens/s" : "samples/s";
}

std::string EpochFigures(const petra::v1::Progress& p, bool language_model) {
  if (language_model) {
    const std::string valid =
        p.has_test_accuracy()
            ? absl::StrFormat(
                  "valid loss %.4f (perplexity %.2f, %.3f "
                  "bits/byte)",
                  p.test_loss(), std::exp(p.test_loss()), BitsPerByte(p))
            : "valid loss -";
    return absl::StrFormat("train loss %.4f, %s, %.0f tokens/s", p.train_loss(),
                           valid, p.samples_per_second());
  }
  return absl::StrFormat(
      "train loss %.4f, train acc %.2f%%, test acc %s, %.0f samples/s",
      p.train_loss(), 100 * p.train_accuracy(),
      p.has_test_accuracy() ? absl::StrFormat("%.2f%%", 100 * p.test_accuracy())
                            : "-",
      p.samples_per_second());
}

std::string PointName(const petra::v1::Progress& p) {
  std::string out = absl::StrFormat("epoch %u/%u", p.epoch(), p.total_epochs());
  if (p.mid_epoch()) {
    absl::StrAppendFormat(&out, ", step %llu",
                          static_cast<unsigned long long>(p.step()));
  }
  return out;
}

std::string ResultFigures(const petra::v1::Progress& p, bool language_model) {
  if (language_model) {
    return absl::StrFormat(
        "validation %.3f bits per byte (loss %.4f, perplexity %.2f)",
        BitsPerByte(p), p.test_loss(), std::exp(p.test_loss()));
  }
  return absl::StrFormat("test accuracy %.2f%%", 100 * p.test_accuracy());
}

}  // namespace petra::client
