log_level = "warn"
port      = 8600

consul {
  address = "base:8500"
  token   = "token-one"
}

buffer_period {
  min = "10s"
}

driver "terraform" {
  log = true
  required_providers {
    aws = "1.0.0"
  }
  backend "consul" {
    path = "state/path"
  }
}

terraform_provider "aws" {
  region = "eu-west-1"
}

task {
  name   = "one"
  module = "org/one/mod"
  condition "services" {
    names = ["one"]
  }
}
