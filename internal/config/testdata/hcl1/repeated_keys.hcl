# HCL 1 keeps the last value of a repeated argument and appends lists.
port = 1000
port = 2000
task {
  name      = "web"
  module    = "./m"
  providers = ["a"]
  providers = ["b"]
  condition "services" {
    names = ["web"]
  }
}
terraform_provider "a" {}
terraform_provider "b" {}
