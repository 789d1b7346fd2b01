// Python bindings of the harness extension. ``has_marlin()`` says whether quanto's Marlin
// source was compiled in; the Marlin entry points exist only then.
#include "harness_ops.h"

// pybind11 with torch's tensor caster, without the C++ frontend of <torch/extension.h>.
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace harness_int4;
  m.doc() = "int4-gemm-harness kernels: native INT4, Marlin correction, Marlin glue";
  m.def("has_marlin", []() { return HARNESS_WITH_MARLIN != 0; });
  m.def("native_int4_gemm", &native_int4_gemm, py::arg("A"), py::arg("Bq"), py::arg("scale"),
        py::arg("zero"), py::arg("out"), py::arg("group_size"));
  m.def("a_group_sum", &a_group_sum, py::arg("A"), py::arg("groups"),
        py::arg("use_scratch") = true, py::arg("flags") = 0);
  m.def("correction_accum", &correction_accum, py::arg("C"), py::arg("a_sum"), py::arg("delta"),
        py::arg("flags") = 0);
  m.def("apply_correction", &apply_correction, py::arg("A"), py::arg("C"), py::arg("delta"),
        py::arg("flags") = 0);
  m.def("scratch_state", &scratch_state, py::arg("device"));
  m.def("scratch_free", &scratch_free, py::arg("device"));
  m.def("correction_variant_names", &correction_variant_names);
  m.def("correction_variant", &correction_variant, py::arg("A"), py::arg("C"), py::arg("delta"),
        py::arg("variant"), py::arg("flags") = 0);
  m.def("launch_empty", &launch_empty, py::arg("device"), py::arg("pdl") = false);
  m.def("pdl_supported", &pdl_supported_on, py::arg("device"));
  m.def("pdl_fallbacks", &pdl_fallbacks);
  m.def("variant_scratch_state", &variant_scratch_state, py::arg("device"));
  m.def("variant_scratch_free", &variant_scratch_free, py::arg("device"));
  m.def("graph_cache_size", &graph_cache_entries);
  m.def("graph_cache_clear", &graph_cache_reset);
#if HARNESS_WITH_MARLIN
  m.def("marlin_asym_variant", &marlin_asym_variant, py::arg("A"), py::arg("C"), py::arg("B"),
        py::arg("s"), py::arg("sz"), py::arg("delta"), py::arg("workspace"), py::arg("groupsize"),
        py::arg("variant"), py::arg("flags") = 0, py::arg("max_par") = 16);
  m.def("marlin_gemm", &marlin_gemm, py::arg("A"), py::arg("B"), py::arg("C"), py::arg("s"),
        py::arg("sz"), py::arg("workspace"), py::arg("groupsize"), py::arg("thread_k") = -1,
        py::arg("thread_n") = -1, py::arg("sms") = -1, py::arg("max_par") = 16);
  m.def("marlin_mm_asymmetric", &marlin_mm_asymmetric, py::arg("A"), py::arg("B"), py::arg("C"),
        py::arg("s"), py::arg("sz"), py::arg("delta"), py::arg("workspace"), py::arg("groupsize"),
        py::arg("thread_k") = -1, py::arg("thread_n") = -1, py::arg("sms") = -1,
        py::arg("max_par") = 16, py::arg("flags") = 0);
#endif
}
