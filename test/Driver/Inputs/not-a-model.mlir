func.func @forward() {
  return
}
