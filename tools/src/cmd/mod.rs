pub mod apply;
pub mod demo;
pub mod generate;
pub mod promote;
pub mod seed;
pub mod status;
pub mod verify;
