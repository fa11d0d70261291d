"""invimbed/_learning"""
