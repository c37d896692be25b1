# refused: only one 'consul' block
consul = [{ address = "a" }, { address = "b" }]
