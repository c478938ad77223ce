module hurray

go 1.19
