DEBUG = False
NAME = "shop"
