print("v2")
