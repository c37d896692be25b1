# A stand-in for a firewall rule, with Terraform's built-in provider only:
# the rule's CIDR blocks are in terraform_data's input, so a plan shows them
# under change.after.input.cidr_blocks, where a policy looks for them.
variable "cidr_blocks" {
  type = list(string)
}

resource "terraform_data" "rule" {
  input = {
    port        = 443
    cidr_blocks = var.cidr_blocks
  }
}
