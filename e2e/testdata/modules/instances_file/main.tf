# Test fixture shaped like the module of CTS's multi-task scenario: one file
# per service instance, named after its ID, in a directory shared by every
# task (resources/ next to the tasks' working directories).
resource "local_file" "instance" {
  for_each = var.services
  content  = each.value.address
  filename = "../resources/${each.value.id}.txt"
}
