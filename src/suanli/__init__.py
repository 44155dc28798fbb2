"""suanli: a GPU compute rental platform."""
