task = [{ name = "a", module = "./m", condition = { services = { names = ["x"] } } }]
task = [
  { name = "b", module = "./m", condition = [{ "catalog-services" = { regexp = "^web" } }] },
  { name = "c", module = "./m", condition = { schedule = { cron = "*/5 * * * * * *" } } },
]
task {
  name   = "d"
  module = "./m"
  condition "consul-kv" {
    path = "k"
  }
}
