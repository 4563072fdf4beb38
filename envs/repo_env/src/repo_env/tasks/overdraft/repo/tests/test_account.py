import unittest

from bank import Account, InsufficientFunds


class AccountTest(unittest.TestCase):
    def test_withdraw(self):
        a = Account("ann", 100)
        a.withdraw(30)
        self.assertEqual(a.balance, 70)

    def test_overdraft(self):
        a = Account("ann", 10)
        with self.assertRaises(InsufficientFunds):
            a.withdraw(11)
