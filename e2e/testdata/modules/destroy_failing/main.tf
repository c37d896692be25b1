# Test fixture: applies (recording "created" in var.dir); its destroy always
# fails.
variable "services" {
  type = any
}

variable "dir" {
  type = string
}

resource "terraform_data" "thing" {
  input = var.dir

  provisioner "local-exec" {
    command = "echo created >> '${self.input}/created'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "echo 'this destroy always fails' >&2; exit 1"
  }
}
