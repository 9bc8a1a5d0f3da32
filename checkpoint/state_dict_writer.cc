// torch.save's format, streamed (see state_dict_writer.h). A torch.save file is a zip archive
// holding `data.pkl` (a pickle whose tensors name their storages by key through persistent ids),
// `data/<key>` (each storage's raw little-endian bytes), `byteorder` and `version`. The storages
// are written as they come; the pickle, which only references them, is written at the end.
#include "checkpoint/state_dict_writer.h"

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "tools/status_macros.h"

namespace zerotrain::checkpoint {
namespace {

// The pickle opcodes (protocol 2) a state dict of tensors needs.
class Pickle {
 public:
  Pickle() { bytes_ = {'\x80', '\x02'}; }
  void Global(const std::string& module, const std::string& name) {
    bytes_ += 'c' + module + '\n' + name + '\n';
  }
  void Op(char op) { bytes_ += op; }
  void String(const std::string& s) {
    bytes_ += 'X';
    Le(static_cast<uint32_t>(s.size()), 4);
    bytes_ += s;
  }
  void Int(int64_t v) {
    if (v >= 0 && v < (int64_t{1} << 31)) {
      bytes_ += 'J';
      Le(static_cast<uint64_t>(v), 4);
    } else {
      bytes_ += '\x8a';  // LONG1: 8 little-endian two's-complement bytes
      bytes_ += '\x08';
      Le(static_cast<uint64_t>(v), 8);
    }
  }
  void EmptyOrderedDict() {
    Global("collections", "OrderedDict");
    Op(')');
    Op('R');
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string bytes_;
};

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

}  // namespace

struct StateDictWriter::State {
  std::unique_ptr<AtomicFileWriter> file;
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> zip;
  absl::Status write_error;
  std::vector<Entry> entries;
  bool finished = false;
};

StateDictWriter::StateDictWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
StateDictWriter::~StateDictWriter() = default;

absl::StatusOr<std::unique_ptr<StateDictWriter>> StateDictWriter::Open(const std::string& path) {
  auto state = std::make_unique<State>();
  ZT_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Open(path));
  state->file = std::make_unique<AtomicFileWriter>(std::move(file));
  State* s = state.get();
  try {
    state->zip = std::make_unique<caffe2::serialize::PyTorchStreamWriter>(
        [s](const void* data, size_t n) -> size_t {
          if (!s->write_error.ok()) return 0;
          s->write_error = s->file->Append(data, static_cast<int64_t>(n));
          return s->write_error.ok() ? n : 0;
        });
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(path, ": ", e.what_without_backtrace()));
  }
  return std::unique_ptr<StateDictWriter>(new StateDictWriter(std::move(state)));
}

absl::Status StateDictWriter::Add(const std::string& name, const std::vector<int64_t>& shape,
                                  const float* data) {
  if (state_->finished) return absl::FailedPreconditionError("StateDictWriter: already finished");
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const std::string key = std::to_string(state_->entries.size());
  try {
    state_->zip->writeRecord("data/" + key, data, numel * sizeof(float));
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat(
        state_->file->path(), ": writing '", name, "': ",
        state_->write_error.ok() ? e.what_without_backtrace() : state_->write_error.message()));
  }
  state_->entries.push_back({name, shape, numel});
  return absl::OkStatus();
}

absl::Status StateDictWriter::Finish() {
  // {name: _rebuild_tensor_v2(storage, 0, shape, strides, False, OrderedDict()), ...}. A plain
  // dict (insertion-ordered) rather than torch.save's OrderedDict: LibTorch's unpickler reads an
  // OrderedDict as None, and Python's load_state_dict takes either.
  Pickle p;
  p.Op('}');  // EMPTY_DICT
  p.Op('(');  // MARK for SETITEMS
  for (size_t k = 0; k < state_->entries.size(); ++k) {
    const Entry& e = state_->entries[k];
    p.String(e.name);
    p.Global("torch._utils", "_rebuild_tensor_v2");
    p.Op('(');
    p.Op('(');  // the persistent id: ('storage', FloatStorage, key, location, numel)
    p.String("storage");
    p.Global("torch", "FloatStorage");
    p.String(std::to_string(k));
    p.String("cpu");
    p.Int(e.numel);
    p.Op('t');
    p.Op('Q');  // BINPERSID
    p.Int(0);   // storage offset
    p.Op('(');
    for (int64_t d : e.shape) p.Int(d);
    p.Op('t');
    p.Op('(');
    int64_t stride = 1;
    std::vector<int64_t> strides(e.shape.size());
    for (size_t i = e.shape.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= e.shape[i];
    }
    for (int64_t s : strides) p.Int(s);
    p.Op('t');
    p.Op('\x89');          // requires_grad = False
    p.EmptyOrderedDict();  // backward hooks
    p.Op('t');
    p.Op('R');
  }
  p.Op('u');
  p.Op('.');
  try {
    state_->zip->writeRecord("data.pkl", p.bytes().data(), p.bytes().size());
    state_->zip->writeRecord("byteorder", "little", 6);
    state_->zip->writeEndOfFile();
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat(
        state_->file->path(), ": ",
        state_->write_error.ok() ? e.what_without_backtrace() : state_->write_error.message()));
  }
  ZT_RETURN_IF_ERROR(state_->write_error);
  state_->finished = true;
  return state_->file->Commit();
}

int64_t StateDictWriter::bytes_written() const { return state_->file->size(); }

}  // namespace zerotrain::checkpoint
