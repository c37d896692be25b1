# A CTS-compatible module: renders an nginx upstream block from the Consul
# services ctsync passes in, and reloads nginx when the block changes.

terraform {
  required_providers {
    local = {
      source = "hashicorp/local"
    }
  }
}

locals {
  # Only instances of the chosen service, with a plain host:port (a value
  # from the catalog that is not one is left out rather than written into
  # the nginx configuration).
  backends = sort(distinct([
    for s in values(var.services) : "${s.address}:${s.port}"
    if s.name == var.service_name && can(regex("^[A-Za-z0-9.:_-]+$", s.address))
  ]))

  servers = length(local.backends) > 0 ? join("", [for b in local.backends : "    server ${b};\n"]) : "    server 127.0.0.1:9 down;\n"

  upstream = "# Rendered by the ctsync load-balancer module. Do not edit.\nupstream ${var.upstream_name} {\n${local.servers}}\n"
}

resource "local_file" "upstream" {
  filename = var.upstream_file
  content  = local.upstream
}

resource "terraform_data" "reload" {
  count            = var.reload_command == "" ? 0 : 1
  triggers_replace = [local_file.upstream.content]

  provisioner "local-exec" {
    command = var.reload_command
  }
}
