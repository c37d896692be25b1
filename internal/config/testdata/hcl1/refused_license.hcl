# refused: license
license {
  path = "..."
  auto_retrieval { enabled = true }
}
