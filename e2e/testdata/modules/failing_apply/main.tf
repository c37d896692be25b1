# Test fixture: the plan adds a resource, whose provisioner then fails: a
# failed apply with a plan summary, retried.
variable "services" {
  type = any
}

resource "terraform_data" "rules" {
  input = sort(keys(var.services))

  provisioner "local-exec" {
    command = "echo configuring firewall APPLY --zone=edge --rules=/etc/firewall/rules.d --verbose; exit 3"
  }
}
