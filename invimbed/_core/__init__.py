"""invimbed/_core"""
