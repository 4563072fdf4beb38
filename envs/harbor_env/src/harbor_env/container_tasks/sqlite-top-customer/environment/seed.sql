create table orders(customer text, amount integer);
insert into orders values('alice',50),('bob',70),('carol',40),('carol',45),('alice',20),('bob',5);
