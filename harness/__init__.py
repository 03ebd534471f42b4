"""prefixbench.harness"""
