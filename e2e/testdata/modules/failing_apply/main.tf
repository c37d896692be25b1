# Test fixture: the plan adds a resource, whose provisioner then fails: a
# failed apply with a plan summary, retried. The provisioner's long command
# line must not reach a one-line error; the cause it prints must.
variable "services" {
  type = any
}

resource "terraform_data" "rules" {
  input = sort(keys(var.services))

  provisioner "local-exec" {
    command = "echo configuring firewall APPLY --zone=edge --rules=/etc/firewall/rules.d --verbose >/dev/null; echo 503 Service Unavailable >&2; exit 3"
  }
}
