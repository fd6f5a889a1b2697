"""apiserver"""
