# Test fixture: like services_file, but each apply first appends a line to
# var.dir/started and then waits until var.dir/gate exists.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
  type = map(object({
    id                    = string
    name                  = string
    kind                  = string
    address               = string
    port                  = number
    meta                  = map(string)
    tags                  = list(string)
    namespace             = string
    status                = string
    node                  = string
    node_id               = string
    node_address          = string
    node_datacenter       = string
    node_tagged_addresses = map(string)
    node_meta             = map(string)
    cts_user_defined_meta = map(string)
  }))
}

variable "dir" {
  type = string
}

resource "terraform_data" "gate" {
  triggers_replace = [jsonencode(var.services)]

  provisioner "local-exec" {
    command     = "echo started >> started; while [ ! -f gate ]; do sleep 0.05; done"
    working_dir = var.dir
  }
}

resource "local_file" "services" {
  filename   = "${var.dir}/services.json"
  content    = jsonencode(var.services)
  depends_on = [terraform_data.gate]
}

output "count" {
  value = length(var.services)
}
