log_level         = "debug"
log_format        = "json"
port              = 9000
working_dir       = "/var/lib/ctsync"
id                = "cts-01"
max_parallel_runs = 8

buffer_period {
  enabled = true
  min     = "10s"
  max     = "60s"
}

consul {
  address = "consul.example.com:8501"
  token   = "s3cr3t-token"
  kv_path = "ctsync/"

  tls {
    enabled     = true
    verify      = false
    ca_cert     = "/etc/ca.pem"
    ca_path     = "/etc/ca.d"
    cert        = "/etc/cert.pem"
    key         = "/etc/key.pem"
    server_name = "consul.example.com"
  }

  auth {
    username = "admin"
    password = "hunter2"
  }

  transport {
    dial_keep_alive         = "15s"
    dial_timeout            = "20s"
    disable_keep_alives     = true
    idle_conn_timeout       = "1m"
    max_idle_conns          = 10
    max_idle_conns_per_host = 50
    tls_handshake_timeout   = "3s"
  }

  service_registration {
    enabled      = true
    service_name = "ctsync"
    address      = "10.0.0.5"
    namespace    = "ns1"
    default_check {
      enabled = false
      address = "https://10.0.0.5:9000"
    }
  }
}

driver "terraform" {
  path        = "/usr/local/bin"
  log         = true
  persist_log = true

  backend "s3" {
    bucket = "state"
    region = "eu-west-1"
  }

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
    local = "2.4.0"
  }
}

terraform_provider "aws" {
  region = "eu-west-1"
  retries = 3
  task_env = {
    AWS_PROFILE = "prod"
  }
}

terraform_provider "aws" {
  alias  = "east"
  region = "us-east-1"
}

task {
  name           = "web"
  description    = "configures the web load balancer"
  module         = "org/web/lb"
  version        = "1.2.3"
  providers      = ["aws"]
  variable_files = ["testdata/vars/web.tfvars", "testdata/vars/override.tfvars.json"]
  variables = {
    owner = "inline"
    extra = ["x", "y"]
  }
  enabled     = false
  working_dir = "/tmp/web"
  parallelism = 5

  buffer_period {
    min = "2s"
  }

  condition "services" {
    names      = ["web", "api"]
    datacenter = "dc1"
    namespace  = "default"
    filter     = "Service.Tags contains \"prod\""
    cts_user_defined_meta = {
      team = "web"
    }
    use_as_module_input = false
  }

  module_input "consul-kv" {
    path       = "config/web"
    recurse    = true
    datacenter = "dc2"
    namespace  = "ns"
  }
}

task {
  name      = "catalog"
  module    = "./modules/catalog"
  providers = ["aws.east"]

  condition "catalog-services" {
    regexp     = "^web.*"
    datacenter = "dc1"
    namespace  = "ns"
    node_meta = {
      rack = "r1"
    }
  }

  module_input "services" {
    regexp = ""
  }
}

task {
  name   = "kv"
  module = "org/kv/mod"

  buffer_period {
    enabled = false
  }

  condition "consul-kv" {
    path    = "app/config"
    recurse = true
  }
}

task {
  name   = "nightly"
  module = "org/nightly/mod"

  condition "schedule" {
    cron = "0 0 2 * * * *"
  }

  module_input "services" {
    names = ["db"]
  }
}
