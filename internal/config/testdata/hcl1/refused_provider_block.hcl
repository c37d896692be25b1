# refused: terraform_provider
provider "aws" { region = "x" }
