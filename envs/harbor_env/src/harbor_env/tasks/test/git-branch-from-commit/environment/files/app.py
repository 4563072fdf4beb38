print('one')
