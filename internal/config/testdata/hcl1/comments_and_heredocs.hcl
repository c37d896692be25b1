# hash comment
// slash comment
/* block
   comment */
log_level = /* inline */ "warn" # trailing

task {
  // before a field
  name = "web" # after a field

  description = <<-DESC
    indented heredoc
      keeps relative indentation
    DESC

  module = "./m"
  /* between */ condition "services" {
    names = [
      "a", # first
      "b", // second
    ]
  }
}
