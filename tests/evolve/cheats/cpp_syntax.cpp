// expect: compile_error
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  this is not C++;
}
