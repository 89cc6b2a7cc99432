// Loads a t2t-export SavedModel the way TF Serving's model server does and
// translates standard input, one sentence per line, to standard output.
//
//   model_server_loader [--xla_cpu_compilation_enabled] EXPORT_DIR OPS.so...
//
// The model server registers tensorflow-text's ops by linking them in; here
// each OPS.so is loaded with TF_LoadLibrary. Like the server's main.cc, XLA
// is disabled unless --xla_cpu_compilation_enabled is given. The model is
// loaded with tensorflow::LoadSavedModel and tag "serve" (what the server's
// SavedModelBundleFactory calls), and the input and output tensor names are
// read from the serving_default SignatureDef. Exit status 1 on any error,
// with TensorFlow's message on stderr.

#include <iostream>
#include <string>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/compiler/jit/flags.h"
#include "tensorflow/core/framework/tensor.h"

namespace {

int Fail(const std::string& what, const std::string& message) {
  std::cerr << "model_server_loader: " << what << ": " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  bool xla_cpu_compilation_enabled = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--xla_cpu_compilation_enabled") {
      xla_cpu_compilation_enabled = true;
    } else {
      args.push_back(arg);
    }
  }
  if (args.size() < 2) {
    std::cerr << "usage: model_server_loader [--xla_cpu_compilation_enabled]"
                 " EXPORT_DIR OPS.so...\n";
    return 2;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    TF_Status* status = TF_NewStatus();
    TF_LoadLibrary(args[i].c_str(), status);
    const bool ok = TF_GetCode(status) == TF_OK;
    const std::string message = TF_Message(status);
    TF_DeleteStatus(status);
    if (!ok) return Fail(args[i], message);
  }
  if (!xla_cpu_compilation_enabled) tensorflow::DisableXlaCompilation();

  tensorflow::SavedModelBundle bundle;
  tensorflow::Status status = tensorflow::LoadSavedModel(
      tensorflow::SessionOptions(), tensorflow::RunOptions(), args[0],
      {"serve"}, &bundle);
  if (!status.ok()) return Fail(args[0], status.ToString());

  const auto& signatures = bundle.meta_graph_def.signature_def();
  const auto signature = signatures.find("serving_default");
  if (signature == signatures.end()) {
    return Fail(args[0], "no serving_default signature");
  }
  const auto& inputs = signature->second.inputs();
  const auto& outputs = signature->second.outputs();
  if (inputs.size() != 1 || !outputs.count("translations")) {
    return Fail(args[0], "serving_default is not strings -> translations");
  }
  const std::string input_name = inputs.begin()->second.name();
  const std::string output_name = outputs.at("translations").name();
  std::cerr << "serving_default: " << inputs.begin()->first << " ("
            << input_name << ") -> translations (" << output_name << ")\n";

  std::vector<std::string> lines;
  for (std::string line; std::getline(std::cin, line);) lines.push_back(line);
  tensorflow::Tensor batch(tensorflow::DT_STRING,
                           tensorflow::TensorShape(
                               {static_cast<int64_t>(lines.size())}));
  auto strings = batch.flat<tensorflow::tstring>();
  for (size_t i = 0; i < lines.size(); ++i) strings(i) = lines[i];

  std::vector<tensorflow::Tensor> results;
  status = bundle.session->Run({{input_name, batch}}, {output_name}, {},
                               &results);
  if (!status.ok()) return Fail("serving_default", status.ToString());
  const auto translations = results[0].flat<tensorflow::tstring>();
  for (int64_t i = 0; i < translations.size(); ++i) {
    std::cout << std::string(translations(i)) << "\n";
  }
  return 0;
}
