#include <cstdio>
int main() { std::puts("qwen35"); return 0; }
