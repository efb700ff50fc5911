"""PyInstaller's hook of taichi_aot: its bundled library and the modules it imports where it runs; not what an app
needs only where it imports it itself (the command line, the bench, Taichi, torch, jax)."""

from PyInstaller.utils.hooks import collect_data_files, collect_dynamic_libs, collect_submodules

#: Modules of the package an app runs without: the command line (``__main__`` and ``cli``, whose ``build`` imports
#: Taichi's compiler and whose ``bench`` imports the bench), PyInstaller's hooks, and the interop modules, which import
#: torch and jax at their top (an app that uses them imports them, and PyInstaller follows that import).
LEFT_OUT = ("taichi_aot.__main__", "taichi_aot.cli", "taichi_aot._pyinstaller", "taichi_aot.torch", "taichi_aot.jax")
#: Imports of the package's modules that bring in none of these (PyInstaller reads imports inside functions too: a
#: look at a torch tensor, ``show_config``'s torch line): where the app imports one itself, it is collected as usual.
excludedimports = ["taichi", "torch", "jax", "jaxlib", "cupy", "taichi_aot_bench", *LEFT_OUT]

# _lib/ (libtaichi_c_api and SPIRV-Tools, the LLVM runtime bitcode its x64 and CUDA runtimes read, the licences),
# kept in its folders: taichi_aot finds the library by its place in the package
binaries = collect_dynamic_libs("taichi_aot")
datas = collect_data_files("taichi_aot", includes=["_lib/**/*"])
# what is imported inside functions or from C (the launch backends, the C call's extension, cffi's backend)
hiddenimports = [*collect_submodules("taichi_aot", filter=lambda name: not name.startswith(LEFT_OUT)), "_cffi_backend"]
