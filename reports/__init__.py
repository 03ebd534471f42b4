"""prefixbench.reports"""
