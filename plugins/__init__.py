"""prefixbench.plugins"""
