print("v1")
