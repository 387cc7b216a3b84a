DROP INDEX orders_client_order_id;
ALTER TABLE orders DROP COLUMN duplicate_of;
