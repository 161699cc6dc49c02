pub mod demo;
pub mod generate;
pub mod verify;
