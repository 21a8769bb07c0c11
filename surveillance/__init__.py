"""surveillance: the surveillance service (watchlists, cloned plates, live statistics) and its hit loader."""
