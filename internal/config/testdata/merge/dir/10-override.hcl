log_level = "err"

consul {
  token = "token-two"
}

buffer_period {
  max = "90s"
}

driver "terraform" {
  required_providers {
    local = {
      source  = "hashicorp/local"
      version = "2.0.0"
    }
  }
  backend "consul" {
    gzip = true
  }
}

task {
  name      = "two"
  module    = "org/two/mod"
  providers = ["aws", "local"]
  condition "consul-kv" {
    path = "two"
  }
}
