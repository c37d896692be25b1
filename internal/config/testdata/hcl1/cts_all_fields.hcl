/* Every field of the CTS schema that ctsync reads, with a value that is
   not the default. */
log_level   = "TRACE"
port        = 9558
working_dir = "/opt/cts/tasks"
id          = "cts-main"

buffer_period {
  enabled = true
  min     = "3s"
  max     = "30s"
}

consul {
  address = "consul.service:8501"
  token   = "t0ken"
  kv_path = "custom-path/"
  tls {
    enabled     = true
    verify      = false
    ca_cert     = "/ca.pem"
    ca_path     = "/ca.d"
    cert        = "/cert.pem"
    key         = "/key.pem"
    server_name = "consul.local"
  }
  auth {
    username = "u"
    password = "p"
  }
  transport {
    dial_keep_alive         = "10s"
    dial_timeout            = "20s"
    disable_keep_alives     = true
    idle_conn_timeout       = "1m"
    max_idle_conns          = 50
    max_idle_conns_per_host = 250
    tls_handshake_timeout   = "15s"
  }
  service_registration {
    enabled      = true
    service_name = "cts-svc"
    address      = "10.1.1.1"
    default_check {
      enabled = false
      address = "https://10.1.1.1:9558"
    }
  }
}

driver "terraform" {
  path        = "/usr/local/bin/"
  log         = true
  persist_log = true
  backend "consul" {
    gzip   = true
    path   = "tf/state"
    scheme = "https"
  }
  required_providers {
    aws = { source = "hashicorp/aws", version = "~> 5.0" }
  }
}

terraform_provider "aws" {
  region = "{{ env \"CTS_TEST_REGION\" }}"
  task_env {
    "AWS_PROFILE" = "ops"
  }
}

terraform_provider "aws" {
  alias  = "west"
  region = "us-west-2"
  assume_role {
    role_arn = "arn:aws:iam::1:role/x"
  }
}

task {
  name        = "all-services"
  description = <<EOF
A heredoc description
over two lines.
EOF
  module      = "org/mod/aws"
  version     = "2.1.0"
  providers   = ["aws.west"]
  enabled     = false
  working_dir = "/tmp/all"
  buffer_period {
    enabled = true
    max     = "45s"
  }
  condition "services" {
    regexp                = "^web-.*"
    datacenter            = "dc2"
    namespace             = "ns"
    filter                = "Service.Tags contains \"prod\""
    cts_user_defined_meta = { owner = "net" }
    use_as_module_input   = false
  }
  module_input "consul-kv" {
    path       = "cfg/"
    recurse    = true
    datacenter = "dc2"
  }
}

task {
  name   = "catalog"
  module = "./local"
  condition "catalog-services" {
    regexp     = "^api"
    datacenter = "dc1"
    node_meta {
      rack = "r1"
    }
    source_includes_var = true
  }
  source_input "services" {
    names = ["db"]
  }
}

task {
  name   = "kv"
  source = "./local"
  condition "consul-kv" {
    path                = "flags/x"
    use_as_module_input = false
  }
}

task {
  name   = "nightly"
  module = "./local"
  buffer_period {
    min = "1s"
  }
  condition "schedule" {
    cron = "0 0 2 * * * *"
  }
  module_input "services" {
    names = ["web"]
    cts_user_defined_meta {
      team = "a"
    }
  }
}
