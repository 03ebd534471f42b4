"""prefixbench.engines"""
