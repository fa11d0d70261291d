"""invimbed/_control"""
