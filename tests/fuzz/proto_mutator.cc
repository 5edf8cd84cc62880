#include "tests/fuzz/proto_mutator.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <cmath>
#include <limits>
#include <vector>

namespace petra::fuzz {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Values that have broken code before, or would: the edges of each type.
constexpr int64_t kInts[] = {0,
                             1,
                             -1,
                             2,
                             7,
                             10,
                             11,
                             255,
                             1000,
                             65536,
                             std::numeric_limits<int32_t>::max(),
                             std::numeric_limits<int32_t>::min(),
                             int64_t{1} << 31,
                             (int64_t{1} << 32) - 1,
                             int64_t{1} << 40,
                             std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::min()};
const double kDoubles[] = {0.0,
                           -0.0,
                           1.0,
                           -1.0,
                           0.5,
                           1e-300,
                           1e300,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::denorm_min()};
const char* const kStrings[] = {"",
                                ".",
                                "..",
                                "/",
                                "../../../etc/passwd",
                                "/etc/passwd",
                                "a/../../b",
                                "job-1",
                                "job-1/../job-2",
                                "cpu",
                                "cuda:99",
                                "127.0.0.1:1",
                                "[::1]:0",
                                "host:99999",
                                "\xff\xfe not utf-8",
                                "name\xe2\x80\xae" "evil",
                                "%s%n%x",
                                "\0\0\0"};

uint64_t Pick(FuzzBytes& in, int64_t random) {
  return in.Below(2) == 0 ? static_cast<uint64_t>(
                                kInts[in.Below(sizeof(kInts) / sizeof(*kInts))])
                          : static_cast<uint64_t>(random);
}

std::string PickString(FuzzBytes& in) {
  switch (in.Below(4)) {
    case 0:
      return kStrings[in.Below(sizeof(kStrings) / sizeof(*kStrings))];
    case 1:
      return in.Bytes(64);
    case 2:  // large: what a limit must stop
      return std::string(size_t{1} << (10 + in.Below(11)),
                         static_cast<char>('a' + in.Below(26)));
    default:
      return std::string(in.Below(32), '.');
  }
}

// One new value for the singular field `f` of `m`.
void SetScalar(Message* m, const FieldDescriptor* f, FuzzBytes& in) {
  const Reflection* r = m->GetReflection();
  const int64_t random = static_cast<int64_t>(in.Word());
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      r->SetInt32(m, f, static_cast<int32_t>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      r->SetInt64(m, f, static_cast<int64_t>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      r->SetUInt32(m, f, static_cast<uint32_t>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->SetUInt64(m, f, Pick(in, random));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->SetDouble(m, f, kDoubles[in.Below(sizeof(kDoubles) / sizeof(double))]);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->SetFloat(m, f,
                  static_cast<float>(
                      kDoubles[in.Below(sizeof(kDoubles) / sizeof(double))]));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(m, f, !r->GetBool(*m, f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      // proto3 enums are open: numbers no name has are sent as they are.
      r->SetEnumValue(m, f,
                      in.Below(2) == 0
                          ? f->enum_type()
                                ->value(static_cast<int>(
                                    in.Below(f->enum_type()->value_count())))
                                ->number()
                          : static_cast<int>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, f, PickString(in));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

void AddElement(Message* m, const FieldDescriptor* f, FuzzBytes& in) {
  const Reflection* r = m->GetReflection();
  const int64_t random = static_cast<int64_t>(in.Word());
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      r->AddInt32(m, f, static_cast<int32_t>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      r->AddInt64(m, f, static_cast<int64_t>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      r->AddUInt32(m, f, static_cast<uint32_t>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->AddUInt64(m, f, Pick(in, random));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->AddDouble(m, f, kDoubles[in.Below(sizeof(kDoubles) / sizeof(double))]);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->AddFloat(m, f, 1.0f);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      r->AddBool(m, f, in.Below(2) == 1);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      r->AddEnumValue(m, f, static_cast<int>(Pick(in, random)));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      r->AddString(m, f, PickString(in));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* added = r->AddMessage(m, f);
      // A copy of an element already there, or a new one, changed a bit.
      const int n = r->FieldSize(*m, f);
      if (n > 1) added->CopyFrom(r->GetRepeatedMessage(*m, f, in.Below(n - 1)));
      Mutate(added, in, 1);
      break;
    }
  }
}

void MutateRepeated(Message* m, const FieldDescriptor* f, FuzzBytes& in) {
  const Reflection* r = m->GetReflection();
  const int n = r->FieldSize(*m, f);
  switch (in.Below(5)) {
    case 0:
      AddElement(m, f, in);
      break;
    case 1:
      if (n > 0) r->RemoveLast(m, f);
      break;
    case 2:
      if (n > 1) {
        r->SwapElements(m, f, static_cast<int>(in.Below(n)),
                        static_cast<int>(in.Below(n)));
      }
      break;
    case 3:  // many: what a count limit must stop
      for (uint64_t k = 0, more = 1 + in.Below(2000); k < more; ++k) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          r->AddMessage(m, f);
        } else {
          AddElement(m, f, in);
        }
      }
      break;
    default:
      if (n > 0 && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Mutate(r->MutableRepeatedMessage(m, f, static_cast<int>(in.Below(n))),
               in, 1);
      } else {
        r->ClearField(m, f);
      }
  }
}

}  // namespace

uint64_t FuzzBytes::Below(uint64_t bound) {
  if (bound == 0) return 0;
  return Word() % bound;
}

uint64_t FuzzBytes::Word() {
  uint64_t w = 0;
  for (int i = 0; i < 4 && at_ < size_; ++i) w = (w << 8) | data_[at_++];
  return w;
}

std::string FuzzBytes::Bytes(size_t max) {
  const size_t n =
      std::min<size_t>(Below(max + 1), size_ - std::min(at_, size_));
  std::string out(reinterpret_cast<const char*>(data_ + at_), n);
  at_ += n;
  return out;
}

void Mutate(Message* m, FuzzBytes& in, int steps) {
  const Reflection* r = m->GetReflection();
  const auto* d = m->GetDescriptor();
  for (int step = 0; step < steps && !in.empty(); ++step) {
    if (d->field_count() == 0) return;
    const FieldDescriptor* f =
        d->field(static_cast<int>(in.Below(d->field_count())));
    if (f->is_repeated()) {
      MutateRepeated(m, f, in);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (in.Below(4) == 0) {
        r->ClearField(m, f);
      } else {
        Mutate(r->MutableMessage(m, f), in, 1 + static_cast<int>(in.Below(3)));
      }
    } else {
      SetScalar(m, f, in);
    }
  }
}

}  // namespace petra::fuzz
