"""
Get started: vector add on VTA's ALU
====================================
"""
print("hello")
