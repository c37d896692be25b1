# refused: port
port = 09
