"""prefixbench.workloads"""
