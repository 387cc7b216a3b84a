DROP INDEX orders_client_order_id;
ALTER TABLE orders DROP COLUMN duplicate_marked_by_migration, DROP COLUMN duplicate_of;
