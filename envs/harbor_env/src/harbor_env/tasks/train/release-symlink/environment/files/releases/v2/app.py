print('v2')
