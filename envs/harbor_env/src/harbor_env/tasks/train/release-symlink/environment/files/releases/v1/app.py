print('v1')
