-- A new customer account: $1 its ACC id, $2 its name.
INSERT INTO accounts (id, name, kind) VALUES ($1, $2, 'customer')
