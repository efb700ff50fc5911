"""PyInstaller's hook of taichi_aot: its bundled library and data, and the modules it imports where it runs."""

from PyInstaller.utils.hooks import collect_data_files, collect_dynamic_libs, collect_submodules

# _lib/ (libtaichi_c_api and SPIRV-Tools, the LLVM runtime bitcode its x64 and CUDA runtimes read, the licences) and
# the demo's module, kept in their folders: taichi_aot finds the library by its place in the package
binaries = collect_dynamic_libs("taichi_aot")
datas = collect_data_files("taichi_aot", includes=["_lib/**/*", "cli/*.tcm"])
# what is imported inside functions or from C (the launch backends, the C call's extension, cffi's backend)
hiddenimports = [*collect_submodules("taichi_aot", filter=lambda name: "_pyinstaller" not in name), "_cffi_backend"]
