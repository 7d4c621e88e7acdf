namespace qwen35::kernels { int kernels_anchor() { return 0; } }
