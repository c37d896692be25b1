# Generated configs often put the next argument right after a closing brace.
consul {
  address = "consul.example.com:8500"
}port = 8558
task {
  name   = "web"
  module = "./modules/web"
  condition "services" {
    names = ["web"]
  }
}working_dir = "/var/cts"
