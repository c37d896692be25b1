# refused: must be a string
task = [{ name = "web", module = { path = "./m" }, condition = { services = { names = ["x"] } } }]
