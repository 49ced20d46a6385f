// Index builders for megamlm.data, as a CPython extension (megamlm.data._helpers).
//
// Arrays are passed as objects supporting the buffer protocol (numpy arrays) and written in
// place; shapes and dtypes are checked here, so a wrong call raises ValueError instead of
// writing out of bounds. Each function has a numpy twin in megamlm/data that produces the
// same arrays; tests compare them.
//
// The sample index is built per epoch: `document_order` is that epoch's permutation of the
// document ids and `out` gets one row per window of the epoch's packed stream.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <algorithm>
#include <queue>
#include <set>
#include <utility>
#include <vector>

namespace {

// A contiguous buffer with a checked element kind ('i' int, 'u' unsigned, 'f' float) and size.
struct View {
  Py_buffer buffer{};
  bool held = false;
  ~View() {
    if (held) PyBuffer_Release(&buffer);
  }
  bool acquire(PyObject* object, bool writable, const char* name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, &buffer, flags) != 0) {
      PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous%s array", name, writable ? " writable" : "");
      return false;
    }
    held = true;
    return true;
  }
  char kind() const {
    const char* f = buffer.format ? buffer.format : "B";
    while (*f == '<' || *f == '=' || *f == '@' || *f == '!') ++f;
    switch (*f) {
      case 'b': case 'h': case 'i': case 'l': case 'q': return 'i';
      case 'B': case 'H': case 'I': case 'L': case 'Q': return 'u';
      case 'f': case 'd': return 'f';
      default: return '?';
    }
  }
  Py_ssize_t count() const { return buffer.itemsize ? buffer.len / buffer.itemsize : 0; }
  bool expect(char want_kind, Py_ssize_t want_itemsize, const char* name) const {
    if (kind() != want_kind || buffer.itemsize != want_itemsize) {
      PyErr_Format(PyExc_ValueError, "%s has the wrong dtype (format '%s', itemsize %zd)", name,
                   buffer.format ? buffer.format : "B", buffer.itemsize);
      return false;
    }
    return true;
  }
};

template <typename Out>
bool fill_sample_index(const int32_t* sizes, Py_ssize_t num_documents, const int32_t* document_index,
                       Py_ssize_t index_length, int64_t seq_length, Out* out, Py_ssize_t num_windows) {
  Py_ssize_t position = 0;
  int64_t document_start = 0;
  for (Py_ssize_t window = 0; window < num_windows; ++window) {
    const int64_t start = static_cast<int64_t>(window) * seq_length;
    // Move to the first document that ends after `start` (empty documents are passed over).
    while (true) {
      if (position >= index_length) return false;
      const int32_t document = document_index[position];
      if (document < 0 || document >= num_documents) return false;
      const int64_t end = document_start + sizes[document];
      if (end > start) break;
      document_start = end;
      ++position;
    }
    out[2 * window] = static_cast<Out>(position);
    out[2 * window + 1] = static_cast<Out>(start - document_start);
  }
  return true;
}

PyObject* build_sample_index(PyObject*, PyObject* args) {
  PyObject *sizes_obj, *document_index_obj, *out_obj;
  long long seq_length;
  if (!PyArg_ParseTuple(args, "OOLO", &sizes_obj, &document_index_obj, &seq_length, &out_obj)) return nullptr;
  View sizes, document_index, out;
  if (!sizes.acquire(sizes_obj, false, "sizes") || !sizes.expect('i', 4, "sizes")) return nullptr;
  if (!document_index.acquire(document_index_obj, false, "document_order") ||
      !document_index.expect('i', 4, "document_order"))
    return nullptr;
  if (!out.acquire(out_obj, true, "out")) return nullptr;
  if (out.kind() != 'i' || (out.buffer.itemsize != 4 && out.buffer.itemsize != 8)) {
    PyErr_SetString(PyExc_ValueError, "out must be an int32 or int64 array of shape (windows, 2)");
    return nullptr;
  }
  if (seq_length < 1 || out.count() % 2) {
    PyErr_SetString(PyExc_ValueError, "seq_length must be positive and out must have two columns");
    return nullptr;
  }
  const Py_ssize_t num_windows = out.count() / 2;
  bool ok;
  Py_BEGIN_ALLOW_THREADS;
  if (out.buffer.itemsize == 4) {
    ok = fill_sample_index(static_cast<const int32_t*>(sizes.buffer.buf), sizes.count(),
                           static_cast<const int32_t*>(document_index.buffer.buf), document_index.count(),
                           seq_length, static_cast<int32_t*>(out.buffer.buf), num_windows);
  } else {
    ok = fill_sample_index(static_cast<const int32_t*>(sizes.buffer.buf), sizes.count(),
                           static_cast<const int32_t*>(document_index.buffer.buf), document_index.count(),
                           seq_length, static_cast<int64_t*>(out.buffer.buf), num_windows);
  }
  Py_END_ALLOW_THREADS;
  if (!ok) {
    PyErr_SetString(PyExc_ValueError, "the documents hold fewer tokens than the windows need, or a document id is out of range");
    return nullptr;
  }
  Py_RETURN_NONE;
}

// Dataset d's n-th sample is due at (n + 0.5) / weights[d]; samples go out in order of due
// time, ties to the lower dataset number (what a stable sort of all due times gives).
PyObject* build_blend_index(PyObject*, PyObject* args) {
  PyObject *weights_obj, *owner_obj, *number_obj;
  if (!PyArg_ParseTuple(args, "OOO", &weights_obj, &owner_obj, &number_obj)) return nullptr;
  View weights, owner, number;
  if (!weights.acquire(weights_obj, false, "weights") || !weights.expect('f', 8, "weights")) return nullptr;
  if (!owner.acquire(owner_obj, true, "owner") || !owner.expect('i', 2, "owner")) return nullptr;
  if (!number.acquire(number_obj, true, "number") || !number.expect('i', 8, "number")) return nullptr;
  if (owner.count() != number.count()) {
    PyErr_SetString(PyExc_ValueError, "owner and number must have the same length");
    return nullptr;
  }
  const double* w = static_cast<const double*>(weights.buffer.buf);
  const Py_ssize_t num_datasets = weights.count();
  if (num_datasets > 32767) {
    PyErr_SetString(PyExc_ValueError, "at most 32767 datasets can be blended");
    return nullptr;
  }
  bool any_positive = false;
  for (Py_ssize_t d = 0; d < num_datasets; ++d) {
    if (!(w[d] >= 0)) {
      PyErr_SetString(PyExc_ValueError, "weights must be non-negative");
      return nullptr;
    }
    any_positive = any_positive || w[d] > 0;
  }
  if (!any_positive && owner.count() > 0) {
    PyErr_SetString(PyExc_ValueError, "at least one weight must be positive");
    return nullptr;
  }
  int16_t* owner_out = static_cast<int16_t*>(owner.buffer.buf);
  int64_t* number_out = static_cast<int64_t*>(number.buffer.buf);
  const Py_ssize_t total = owner.count();
  Py_BEGIN_ALLOW_THREADS;
  using Due = std::pair<double, int>;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> queue;
  std::vector<int64_t> next(num_datasets, 0);
  for (Py_ssize_t d = 0; d < num_datasets; ++d) {
    if (w[d] > 0) queue.emplace(0.5 / w[d], static_cast<int>(d));
  }
  for (Py_ssize_t i = 0; i < total; ++i) {
    const int d = queue.top().second;
    queue.pop();
    owner_out[i] = static_cast<int16_t>(d);
    number_out[i] = next[d];
    ++next[d];
    queue.emplace((static_cast<double>(next[d]) + 0.5) / w[d], d);
  }
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

// Stable counting sort of bucket numbers: out[j] = the j-th element index in (bucket, index)
// order, i.e. numpy.argsort(bucket_of, kind="stable").
PyObject* group_by_bucket(PyObject*, PyObject* args) {
  PyObject *bucket_obj, *out_obj;
  if (!PyArg_ParseTuple(args, "OO", &bucket_obj, &out_obj)) return nullptr;
  View bucket, out;
  if (!bucket.acquire(bucket_obj, false, "bucket_of") || !bucket.expect('u', 2, "bucket_of")) return nullptr;
  if (!out.acquire(out_obj, true, "out")) return nullptr;
  if (out.kind() == '?' || out.kind() == 'f' || (out.buffer.itemsize != 4 && out.buffer.itemsize != 8)) {
    PyErr_SetString(PyExc_ValueError, "out must be a 4- or 8-byte integer array");
    return nullptr;
  }
  const Py_ssize_t n = bucket.count();
  if (out.count() != n) {
    PyErr_SetString(PyExc_ValueError, "out must have as many elements as bucket_of");
    return nullptr;
  }
  if (out.buffer.itemsize == 4 && n > 0xFFFFFFFFLL) {
    PyErr_SetString(PyExc_ValueError, "a 4-byte out cannot hold the indices of this many elements");
    return nullptr;
  }
  const uint16_t* b = static_cast<const uint16_t*>(bucket.buffer.buf);
  const bool wide = out.buffer.itemsize == 8;
  void* dest = out.buffer.buf;
  Py_BEGIN_ALLOW_THREADS;
  std::vector<int64_t> next(65537, 0);
  for (Py_ssize_t i = 0; i < n; ++i) ++next[b[i] + 1];
  for (size_t k = 1; k < next.size(); ++k) next[k] += next[k - 1];
  if (wide) {
    int64_t* o = static_cast<int64_t*>(dest);
    for (Py_ssize_t i = 0; i < n; ++i) o[next[b[i]]++] = i;
  } else {
    uint32_t* o = static_cast<uint32_t*>(dest);
    for (Py_ssize_t i = 0; i < n; ++i) o[next[b[i]]++] = static_cast<uint32_t>(i);
  }
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

// Best fit of documents (lengths, in order) into rows of seq_length tokens over a window of open_rows open rows,
// as megamlm/data/documents.py's pack_rows: each document goes into the open row with the least room that holds it
// (the lowest row number among equals), or opens a row, emitting the fullest open row first when open_rows are open;
// a row is emitted when full, the rows still open at the end in the order they were opened. Writes positions (the
// documents row by row, in emission order) and row_starts (R + 1 entries) and returns R.
PyObject* pack_best_fit(PyObject*, PyObject* args) {
  PyObject *lengths_obj, *positions_obj, *row_starts_obj;
  long long seq_length, open_rows;
  if (!PyArg_ParseTuple(args, "OLLOO", &lengths_obj, &seq_length, &open_rows, &positions_obj, &row_starts_obj))
    return nullptr;
  View lengths, positions, row_starts;
  if (!lengths.acquire(lengths_obj, false, "lengths") || !lengths.expect('i', 8, "lengths")) return nullptr;
  if (!positions.acquire(positions_obj, true, "positions") || !positions.expect('i', 8, "positions")) return nullptr;
  if (!row_starts.acquire(row_starts_obj, true, "row_starts") || !row_starts.expect('i', 8, "row_starts"))
    return nullptr;
  const Py_ssize_t n = lengths.count();
  if (positions.count() != n || row_starts.count() != n + 1 || seq_length < 1 || open_rows < 1) {
    PyErr_SetString(PyExc_ValueError, "positions must hold N and row_starts N + 1 entries; seq_length and open_rows "
                    "must be positive");
    return nullptr;
  }
  const int64_t* length = static_cast<const int64_t*>(lengths.buffer.buf);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (length[i] < 1 || length[i] > seq_length) {
      PyErr_SetString(PyExc_ValueError, "every length must be between 1 and seq_length");
      return nullptr;
    }
  }
  int64_t* out = static_cast<int64_t*>(positions.buffer.buf);
  int64_t* starts = static_cast<int64_t*>(row_starts.buffer.buf);
  Py_ssize_t emitted_rows = 0;
  Py_BEGIN_ALLOW_THREADS;
  std::vector<int64_t> row_of(n);     // the row of each document
  std::vector<int64_t> rank_of;       // each row's place in the emission order (-1 while open)
  std::set<std::pair<int64_t, int64_t>> room;  // (room left, row) of the open rows
  int64_t next_rank = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    auto at = room.lower_bound({length[i], -1});
    int64_t left, row;
    if (at != room.end()) {
      left = at->first;
      row = at->second;
      room.erase(at);
    } else {
      if (static_cast<long long>(room.size()) == open_rows) {
        rank_of[room.begin()->second] = next_rank++;
        room.erase(room.begin());
      }
      left = seq_length;
      row = static_cast<int64_t>(rank_of.size());
      rank_of.push_back(-1);
    }
    row_of[i] = row;
    if (left > length[i]) {
      room.insert({left - length[i], row});
    } else {
      rank_of[row] = next_rank++;
    }
  }
  std::vector<int64_t> still_open;
  for (const auto& entry : room) still_open.push_back(entry.second);
  std::sort(still_open.begin(), still_open.end());
  for (int64_t row : still_open) rank_of[row] = next_rank++;
  emitted_rows = static_cast<Py_ssize_t>(rank_of.size());
  // A stable counting sort of the documents by their row's rank: positions within a row stay in order.
  std::vector<int64_t> count(emitted_rows + 1, 0);
  for (Py_ssize_t i = 0; i < n; ++i) ++count[rank_of[row_of[i]] + 1];
  for (Py_ssize_t r = 0; r < emitted_rows; ++r) count[r + 1] += count[r];
  for (Py_ssize_t r = 0; r <= emitted_rows; ++r) starts[r] = count[r];
  for (Py_ssize_t i = 0; i < n; ++i) out[count[rank_of[row_of[i]]]++] = i;
  Py_END_ALLOW_THREADS;
  return PyLong_FromSsize_t(emitted_rows);
}

PyMethodDef methods[] = {
    {"pack_best_fit", pack_best_fit, METH_VARARGS,
     "pack_best_fit(lengths int64[N], seq_length, open_rows, positions int64[N], row_starts int64[N + 1]) -> rows: "
     "megamlm/data/documents.py's pack_rows for packed_documents"},
    {"group_by_bucket", group_by_bucket, METH_VARARGS,
     "group_by_bucket(bucket_of uint16[N], out int32|uint32|int64[N]): numpy.argsort(bucket_of, kind='stable')"},
    {"build_sample_index", build_sample_index, METH_VARARGS,
     "build_sample_index(sizes int32[D], document_order int32[M], seq_length, out int32|int64[W, 2]): row i = "
     "(position in document_order, offset) where window i of the packed stream starts"},
    {"build_blend_index", build_blend_index, METH_VARARGS,
     "build_blend_index(weights float64[K] (normalized), owner int16[N], number int64[N])"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_helpers", "megamlm dataset index builders (C++)", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__helpers(void) { return PyModule_Create(&module); }
