DEBUG = False
NAME = 'shop'
